-- KEYS: presence, woken marker (one identity's slot). ARGV: 1 to coalesce, window ms.
-- Returns 1 (online), 2 (coalesced) or 0 (send).
if redis.call('EXISTS', KEYS[1]) == 1 then return 1 end
if ARGV[1] == '1' then
    if not redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[2]) then return 2 end
end
return 0
