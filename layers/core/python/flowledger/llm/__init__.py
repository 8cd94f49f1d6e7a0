"""Model ports (chat, embeddings), the OpenAI adapter, the offline default and retry policies."""
