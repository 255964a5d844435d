import NIOCore

/// Commands written together with the promises that their replies complete, in order.
struct RedisOutboundRequest {
    var bytes: ByteBuffer
    var promises: [EventLoopPromise<RESPValue>]
    /// How long these commands may wait for others to leave in the same write (zero:
    /// the event loop's current batch of tasks only). See `flush(context:)`.
    var mayWait: TimeAmount = .zero
    /// Commands made only as the write leaves (with `mayWait`): `bytes` is then empty, and
    /// the handler holds the request until its group leaves (`RedisCommandHandler.held`).
    var late: (@Sendable () -> [RedisCommand])? = nil
}

/// Matches replies to requests on a pipelined connection: Redis answers in order,
/// so the oldest waiting promise owns the next reply.
final class RedisCommandHandler: ChannelDuplexHandler {
    typealias InboundIn = RESPValue
    typealias OutboundIn = RedisOutboundRequest
    typealias OutboundOut = ByteBuffer

    private var waiting = CircularBuffer<EventLoopPromise<RESPValue>>(initialCapacity: 64)
    private var closed = false
    /// Receives replies no request waits for: on a subscribed connection, Redis pushes
    /// messages and subscription confirmations unasked.
    private let onUnsolicited: (@Sendable (RESPValue) -> Void)?

    init(onUnsolicited: (@Sendable (RESPValue) -> Void)? = nil) {
        self.onUnsolicited = onUnsolicited
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let request = unwrapOutboundIn(data)
        if closed {
            request.promises.forEach { $0.fail(RedisError.connectionClosed) }
            promise?.fail(RedisError.connectionClosed)
            return
        }
        waiting.append(contentsOf: request.promises)
        if request.mayWait > .zero {
            let deadline = NIODeadline.now() + request.mayWait
            groupDeadline = min(groupDeadline ?? deadline, deadline)
            if let late = request.late {
                held.append((late, promise))
                return
            }
        } else {
            eagerWritten = true
        }
        // Nothing overtakes what is held.
        releaseHeld(context: context)
        context.write(wrapOutboundOut(request.bytes), promise: promise)
    }

    /// Requests whose commands are made as they leave (`RedisOutboundRequest.late`), in
    /// the order written, while their group waits: made and written when it leaves, or as
    /// soon as anything else is written behind them.
    private var held: [(make: @Sendable () -> [RedisCommand], written: EventLoopPromise<Void>?)] = []

    private func releaseHeld(context: ChannelHandlerContext) {
        guard !held.isEmpty else { return }
        let leaving = held
        held.removeAll(keepingCapacity: true)
        for (make, written) in leaving {
            let commands = make()
            var bytes = context.channel.allocator.buffer(capacity: 512 * commands.count)
            for command in commands {
                command.encode(into: &bytes)
            }
            context.write(wrapOutboundOut(bytes), promise: written)
        }
    }

    /// Flushes wait for the event loop's current batch of tasks: commands written by
    /// many tasks at about the same time leave in one `write(2)` instead of one each.
    private var flushScheduled = false
    /// Group commit: while everything written since the last flush may wait
    /// (`RedisOutboundRequest.mayWait`), the flush waits until the earliest of their
    /// deadlines, so that writes of several messages reach Redis together and share its
    /// event-loop pass, and so its fsync. Any write that may not wait flushes them all
    /// (a write never overtakes an earlier one).
    private var eagerWritten = false
    private var groupDeadline: NIODeadline?
    private var groupFlush: Scheduled<Void>?

    func flush(context: ChannelHandlerContext) {
        if !eagerWritten, let deadline = groupDeadline {
            guard groupFlush == nil else { return }
            let bound = NIOLoopBound((handler: self, context: context), eventLoop: context.eventLoop)
            groupFlush = context.eventLoop.scheduleTask(deadline: deadline) {
                bound.value.handler.flushNow(context: bound.value.context)
            }
            return
        }
        guard !flushScheduled else { return }
        flushScheduled = true
        let bound = NIOLoopBound((handler: self, context: context), eventLoop: context.eventLoop)
        context.eventLoop.execute {
            bound.value.handler.flushNow(context: bound.value.context)
        }
    }

    private func flushNow(context: ChannelHandlerContext) {
        flushScheduled = false
        eagerWritten = false
        groupDeadline = nil
        groupFlush?.cancel()
        groupFlush = nil
        releaseHeld(context: context)
        context.flush()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let value = unwrapInboundIn(data)
        guard let promise = waiting.popFirst() else {
            if let onUnsolicited {
                onUnsolicited(value)
                return
            }
            // A reply nobody asked for means the stream is out of step: start over.
            context.fireErrorCaught(RedisError.protocolViolation("reply without a request"))
            context.close(promise: nil)
            return
        }
        promise.succeed(value)
    }

    func channelInactive(context: ChannelHandlerContext) {
        failAll(RedisError.connectionClosed)
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        groupFlush?.cancel()
        groupFlush = nil
        failAll(RedisError.connectionClosed)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        failAll(error)
        context.close(promise: nil)
    }

    private func failAll(_ error: any Error) {
        closed = true
        let unsent = held
        held.removeAll()
        for request in unsent {
            request.written?.fail(error)
        }
        while let promise = waiting.popFirst() {
            promise.fail(error)
        }
    }
}
