"""The run spec as written: RunSpec and each field checked; nothing it names read yet."""
