"""The pathway library: extraction, matching, embeddings, backfill, decay, stats, comparison."""
