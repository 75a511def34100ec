"""PySpark Python DataSource ``memq`` over S3 prefixes, and the backfill job."""
