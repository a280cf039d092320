"""Types and nodes every pipeline uses."""
