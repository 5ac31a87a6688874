"""Sans-IO codec of the Apache Iggy 0.9 client protocol."""
