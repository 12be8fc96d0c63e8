"""Readers and writers: Parquet/CSV logs, LibSVM, ARFF, OBD, Criteo, policy artifacts, decisions."""
