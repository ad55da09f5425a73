"""File tools: read, write, patch and delete files, list folders, find files by name."""
