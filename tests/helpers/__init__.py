"""Helpers shared by test packages (imported as tests.helpers.*)."""
