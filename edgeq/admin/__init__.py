"""Remote administration on the device: the admin message, its executor, what each action does, and its SQL."""
