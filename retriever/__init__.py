"""The retrieval service: corpus reading, dense (faiss) and BM25 indexes, the HTTP server, the client."""
