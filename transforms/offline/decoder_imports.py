"""What the decoding children's forkserver imports (`isolation.DECODER_PRELOAD`): TensorFlow and
the inspection (`image_inspection`, which imports no Beam: ~0.8 s of CPU less per job start),
imported with the cyclic collector paused and then frozen (`transforms.gc_policy`), so the
forkserver's start-up is ~1 s of CPU shorter and no child's collection walks (and copies, page
by page) the heap it inherits; first, the C heap keeps what the children free for their next
image (`transforms.heap_policy`). Importing this module is its whole purpose."""
from __future__ import annotations

from transforms import heap_policy
from transforms.gc_policy import long_lived_imports

heap_policy.retain_freed_memory()

with long_lived_imports():
    import tensorflow  # noqa: F401

    import transforms.offline.image_inspection  # noqa: F401
