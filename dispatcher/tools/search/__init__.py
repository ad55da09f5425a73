"""Search tools: literal grep and regex search_code over the workspace, and the walk both share."""
