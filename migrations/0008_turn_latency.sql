-- callgate state, version 8: a bot turn carries how long its reply took.
-- The per-turn split (speech end → STT final → dialog first token → TTS
-- first audio → first frame out, in microseconds, as the receipt's
-- stats.turns[] has it) is written with the bot's turn, so the conversation
-- can be shown with its latencies while the call goes on (the receipt's
-- copy is written only at the close). NULL for caller turns and for a bot
-- turn whose timing was not complete (cut before its first frame).
-- Adding a nullable column without a default is a catalog-only change.

ALTER TABLE call_turns ADD COLUMN latency jsonb NULL;
