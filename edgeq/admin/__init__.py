"""Remote administration on the device: the admin message, its executor, the actions, their SQL."""
