"""dualtrack: evidence-based dual-track (NVIDIA GPU vs AWS Trainium2) fine-tuning trials."""

__version__ = "0.1.0"
