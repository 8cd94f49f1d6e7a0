"""Table and bucket declarations and the DynamoDB/S3 helpers built on them."""
