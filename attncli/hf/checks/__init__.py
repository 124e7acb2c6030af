"""A stranger's model files checked: config.json's fields and their defaults, the weights' names, shapes and values (the floor every other hf package stands on)."""
