-- The ranked table's shape, measured on the rows a bench/rerank.py run left (psql -d <bench db> -f
-- bench/rerank_shape.sql): a million rows into the table with its three indexes (what the
-- store's COPY does) against narrower rows, and against a fresh table whose indexes are
-- built after the load (what a partition per team swapped in on a rewrite would do).
\timing on
SET jit = off;
SET synchronous_commit = off;
DROP TABLE IF EXISTS rr_src, rr_wide, rr_narrow, rr_fresh;
CREATE TABLE rr_src AS SELECT * FROM ranking_rankedfinding ORDER BY rank;
SELECT count(*) FROM rr_src;
-- 1. today's shape: rows into a table that holds the indexes (what the store's COPY does)
CREATE TABLE rr_wide (LIKE ranking_rankedfinding INCLUDING ALL);
\echo wide: insert 1M rows into the three indexes
INSERT INTO rr_wide SELECT * FROM rr_src;
SELECT pg_size_pretty(pg_relation_size('rr_wide')) heap, pg_size_pretty(pg_indexes_size('rr_wide')) idx;
\echo wide: delete the team rows (what a rewrite does first)
DELETE FROM rr_wide;
-- 2. narrower rows: decision and environment as small codes, context as an int id
CREATE TABLE rr_narrow (finding_id bigint PRIMARY KEY, team_id int NOT NULL, run_id int, rank int NOT NULL,
  env_rank int NOT NULL, env smallint NOT NULL, score real NOT NULL, decision smallint NOT NULL, context int NOT NULL);
CREATE INDEX ON rr_narrow (team_id, rank);
CREATE INDEX ON rr_narrow (team_id, env, env_rank);
\echo narrow: insert 1M rows into the three indexes
INSERT INTO rr_narrow SELECT finding_id, team_id, run_id, rank, env_rank, 1, score, 2, 7 FROM rr_src;
SELECT pg_size_pretty(pg_relation_size('rr_narrow')) heap, pg_size_pretty(pg_indexes_size('rr_narrow')) idx;
-- 3. a team partition rewritten as a fresh table, indexes built after (swap instead of delete)
\echo fresh table: insert 1M rows, then build the three indexes
BEGIN;
CREATE TABLE rr_fresh (LIKE ranking_rankedfinding INCLUDING DEFAULTS);
INSERT INTO rr_fresh SELECT * FROM rr_src;
ALTER TABLE rr_fresh ADD PRIMARY KEY (finding_id);
CREATE INDEX ON rr_fresh (team_id, rank);
CREATE INDEX ON rr_fresh (team_id, environment, env_rank);
COMMIT;
DROP TABLE rr_src, rr_wide, rr_narrow, rr_fresh;
