"""Knowledge tools: memories kept between sessions and the workspace's own docs."""
