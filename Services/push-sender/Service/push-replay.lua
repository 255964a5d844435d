-- KEYS: dead-letter stream, push stream (one slot). ARGV: count, stream cap, now ms.
-- Keeps a job's `to`, `kind` and `id`; `at` becomes now (the wait starts again).
local entries = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', tonumber(ARGV[1]))
for _, entry in ipairs(entries) do
    local fields = entry[2]
    local job = {}
    for i = 1, #fields, 2 do
        local name = fields[i]
        if name == 'to' or name == 'kind' or name == 'id' then
            table.insert(job, name)
            table.insert(job, fields[i + 1])
        end
    end
    if #job == 6 then
        table.insert(job, 'at')
        table.insert(job, ARGV[3])
        redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], '*', unpack(job))
    end
    redis.call('XDEL', KEYS[1], entry[1])
end
return #entries
