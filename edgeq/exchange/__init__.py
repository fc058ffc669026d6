"""Exchanging messages with other queue managers: transmission, held puts and restored stores."""
