"""What the kernel ran: every cell, recorded as it runs, in true execution order (`log`)."""

__all__ = ["log"]
