-- ffriver 0017: the settings every process of a schema must agree on
-- (issue 40, item 2): outbox and execution retention, each built-in
-- scanner's interval and batch.
--
-- A value stored here wins over a process's flags and ffriver.Config: a
-- scheduler started with another value says so at start and runs the
-- stored one, and the retention scanners' ticks read it when they run, so a
-- takeover by another scheduler never changes retention. `ffctl config
-- set|unset` writes it (ffriver.SetSetting); a scheduler stores the values
-- it was given explicitly that are not stored yet (ffriver.Config.StoreSettings).
-- Values are canonical text (a Go duration such as 168h0m0s, "forever", an
-- integer), checked by the writer; a process refuses to start on one it
-- cannot read.
CREATE TABLE ff_settings (
    name    text        PRIMARY KEY,
    value   text        NOT NULL,
    set_by  text        NOT NULL,
    set_at  timestamptz NOT NULL DEFAULT now()
);
