"""Screens pushed over the main monitor: process detail, signal confirmation, help."""
