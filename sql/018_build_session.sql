-- 018: a context build records the conversation it left out (`exclude_session`: the session whose memories the
-- caller asked to leave out, stripped), so the build history and the web view show why none of that conversation's
-- memories were candidates. NULL for a build that left nothing out, and for every build logged before.

ALTER TABLE retrievals ADD COLUMN exclude_session text;
