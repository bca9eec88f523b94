-- The inbox table of github.com/redisonce/redisonce/integrations/postgres.
--
-- One row per message id: the fence and owner of the latest lease that
-- reached the database, and processed_at once the message's effect committed.
-- The row is marked processed in the same transaction as the effect, so a
-- processed row means "the effect committed, once".
--
-- Inbox.CreateTable runs this file with the table name of WithInboxTable in
-- place of redisonce_inbox (the index is named after the table). A DBA may run
-- it by hand instead; keep the column names and types.
--
--   id            the message id (text: valid UTF-8, no NUL, at most 1 KiB)
--   fence         the lease's fence, a decimal uint64; a lease whose fence is
--                 lower than the row's is refused
--   owner         the lease's owner token; only the owner named here may mark
--                 the row processed
--   claimed_at    when that lease reached the database; Prune deletes rows
--                 claimed longer ago than the retention window, in bounded
--                 batches, through its index
--   processed_at  when the effect committed; NULL while an owner is at work
--                 (or after one failed or died)
--
-- Marking a row processed changes no indexed column, and the fill factor
-- leaves room on each page, so that update is a HOT update (no index write).
CREATE TABLE IF NOT EXISTS redisonce_inbox (
    id           text           NOT NULL PRIMARY KEY,
    fence        numeric(20, 0) NOT NULL CHECK (fence >= 0),
    owner        text           NOT NULL,
    claimed_at   timestamptz    NOT NULL DEFAULT now(),
    processed_at timestamptz
) WITH (fillfactor = 90);

CREATE INDEX IF NOT EXISTS redisonce_inbox_claimed_at_idx ON redisonce_inbox (claimed_at);
