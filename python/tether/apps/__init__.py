"""Applications built on Tether's runtime: `demo` is the main job (`tether demo`)."""
