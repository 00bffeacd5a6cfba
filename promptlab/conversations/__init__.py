"""Conversation logs replayed turn by turn: sessions, the history before a turn, context shards."""
