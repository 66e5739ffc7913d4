"""What rank 0 does with rows: files, the console, comparisons and plots."""
