"""Exchanging messages with other queue managers: transmission, held puts, restored stores."""
