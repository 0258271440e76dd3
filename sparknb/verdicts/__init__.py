"""From sealed runs to a verdict: intervals and tests, the sequential comparison, the rules by which a row decides, and
the rows the Spark community shares."""
