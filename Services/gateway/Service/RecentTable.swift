/// Values kept for a while by key, at most `capacity` of them: past that the oldest
/// go first, and a value past its instant is gone when next asked for. For what a
/// gateway remembers of recent traffic (`LocalDeliveries`, `RecentHandOvers`), kept
/// inside the owner's lock.
struct RecentTable<Value> {
    private var entries: [String: (value: Value, until: ContinuousClock.Instant)] = [:]
    /// Keys in the order they were inserted (some already removed), for eviction.
    private var order: [String] = []
    private var head = 0
    let capacity: Int

    init(capacity: Int) {
        self.capacity = max(1, capacity)
    }

    var count: Int { entries.count }

    /// Keeps `value` under `key` until `until` (replacing what was there).
    mutating func insert(_ value: Value, for key: String, until: ContinuousClock.Instant) {
        if entries.updateValue((value, until), forKey: key) == nil {
            order.append(key)
        }
        while entries.count > capacity, head < order.count {
            entries[order[head]] = nil
            head += 1
        }
        // Removed keys stay in `order` until their turn; compact now and then so that
        // it stays near the capacity.
        if head >= capacity || order.count - head > 2 * capacity {
            order = order[head...].filter { entries[$0] != nil }
            head = 0
        }
    }

    /// The value under `key`, unless it is past its instant (then it is dropped).
    mutating func value(for key: String, now: ContinuousClock.Instant = .now) -> Value? {
        guard let entry = entries[key] else { return nil }
        guard now < entry.until else {
            entries[key] = nil
            return nil
        }
        return entry.value
    }

    /// Changes the value under `key`, keeping its instant; nothing when there is none.
    mutating func update(_ value: Value, for key: String) {
        entries[key]?.value = value
    }

    mutating func remove(_ key: String) {
        entries[key] = nil
    }
}
