"""Opening the live monitor: options, key remaps, the first frame drawn before Textual has loaded."""
