"""tileaot's build-time tools: enumerate the matrix, trace with TileLang, emit, compile."""
