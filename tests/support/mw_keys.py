"""Two workers: the instance keys an all-reduce takes per call, traced plainly and in
`collective_keys.keeping_keys`, and what each call sums.

Prints one JSON line: `plain` and `kept` (keys taken over `CALLS` calls), `sums` (the kept
calls' results).
"""

import json

CALLS = 20


def main():
    import tensorflow as tf

    import mgpu_tf
    from mgpu_tf.compat import collective_keys, private_collectives

    strategy = mgpu_tf.make_strategy("multi_worker", transport="tensorflow")
    launcher = private_collectives.collective_launchers(strategy)[0]

    def make():
        def replica():
            context = tf.distribute.get_replica_context()
            task = tf.cast(context.replica_id_in_sync_group, tf.float32)
            return context.all_reduce("SUM", task + 1.0)

        return lambda: strategy.experimental_local_results(strategy.run(replica))

    taken = {}
    sums = []
    # No control flow to convert: AutoGraph left out, and with it its warnings on stderr.
    for name, function in (
            ("plain", tf.function(make(), autograph=False)),
            ("kept", tf.function(collective_keys.keeping_keys(make(), strategy),
                                 autograph=False))):
        before = private_collectives.next_instance_key(launcher)
        for _ in range(CALLS):
            result = function()
            if name == "kept":
                sums.append(float(result[0]))
        taken[name] = private_collectives.next_instance_key(launcher) - before
    print(json.dumps({**taken, "sums": sums,
                      "unique": private_collectives.unique_instance_keys(launcher)}), flush=True)


if __name__ == "__main__":
    main()
