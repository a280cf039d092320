"""The human-in-the-loop cycle: answers that need a human, feedback, knowledge gaps, proven fixes."""
