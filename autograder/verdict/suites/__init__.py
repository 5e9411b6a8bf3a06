"""The hidden suites: one pytest file per assignment, never released."""
