"""BFCL v4: tool calls graded exactly as the leaderboard grades them."""
