"""What the monitor does to a process on the user's behalf: signals, attaching and detaching the probe."""
