"""The training input's augmentation: stateless, seeded, vectorized over batches.

    seeds      (seed, epoch, step, replica, sample) -> stateless seeds
    geometry   one fused affine warp per sample that also moves boxes
    pixel_ops  colour jitter, gamma, blur, noise, grayscale
    mixing     Mixup / CutMix
    augment    config -> the batch augmenter (adds an op only when it is enabled)
"""
