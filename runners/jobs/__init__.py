"""The job commands: `pixelmill preprocess | nightly | forget | compact | verify | preview`,
what they decide around the Beam job (the guard, the quick look, the summary), and the Airflow DAG."""
