"""Training: the pipeline that turns a scenario's records into job data (``pipeline.py``)."""
