"""Knowledge: documents, chunked and indexed for retrieval (BM25), bodies in S3."""
