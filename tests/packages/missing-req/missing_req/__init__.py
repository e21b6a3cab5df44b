"""Never built."""
