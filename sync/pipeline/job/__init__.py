"""The Spark job: reading the export, the state kept between runs, and every report's computation."""
