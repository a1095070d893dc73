"""Producer, Consumer and Admin clients."""
