"""Git tools: status, diff, log, commit and branch on the workspace's own repository."""
