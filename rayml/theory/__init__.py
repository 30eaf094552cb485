"""Theory trackers: quantities a paper proves things about, measured along training runs."""
