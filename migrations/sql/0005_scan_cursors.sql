-- ffriver 0005: where each scanner's scans of a partition left off (see
-- workers/scan.go, "Scan cursors").
--
-- A scanner with a sweep period (scanners.Settings.Sweep) scans a partition
-- from the keyset position after the last item it enqueued, so work already
-- queued is not read again at every tick; every sweep period a scan starts
-- from the beginning instead, which finds what the position skips: items
-- whose River job was lost, cancelled or discarded, and rows written with a
-- due time behind the position. The row is a hint for speed, never the only
-- record of work: deleting it makes the next scan start from the beginning.
CREATE TABLE ff_scan_cursor (
    scanner        text    NOT NULL,
    -- the scan queue of the scanning process's filter (jobs.ScanQueue): each
    -- filter keeps its own position
    queue          text    NOT NULL,
    partition_key  integer NOT NULL,
    -- the scanner's keyset position (ScanResult.Next) of the last candidate
    -- enqueued; NULL: scan from the beginning
    after          jsonb,
    -- when a scan of this partition last started from the beginning
    swept_at_ms    bigint  NOT NULL DEFAULT 0,
    PRIMARY KEY (scanner, queue, partition_key)
);
