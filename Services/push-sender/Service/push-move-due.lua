-- KEYS: retry set, push stream (one slot). ARGV: now ms, batch, stream cap.
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, member in ipairs(due) do
    local ok, fields = pcall(cjson.decode, member)
    if ok and type(fields) == 'table' and #fields % 2 == 0 and #fields > 0 then
        redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', unpack(fields))
    end
    redis.call('ZREM', KEYS[1], member)
end
return #due
