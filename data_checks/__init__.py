"""Great Expectations suites, validation runner, quarantine and reports for logged bandit data."""
