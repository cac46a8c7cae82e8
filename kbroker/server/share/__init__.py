"""Share groups on the partition leader (KIP-932): share partitions, share sessions."""
