"""The process table: its rows (filtered, sorted, as a tree, by job, by owner), columns and cells."""
