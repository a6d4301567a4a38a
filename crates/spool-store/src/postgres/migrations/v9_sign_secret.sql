-- Version 9: the `[secrets]` entry a delivery's create named to sign its attempts (the name
-- only; keys are never stored), returned by `spoold_steps` with the request it starts.
ALTER TABLE deliveries ADD COLUMN sign_secret TEXT;
