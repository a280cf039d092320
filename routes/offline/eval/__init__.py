"""Evaluation harness: run a QA dataset through the gateway in plain, corrective or adaptive mode."""
