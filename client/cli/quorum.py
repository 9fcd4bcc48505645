"""``rafka quorum describe|add-voter|remove-voter``: the controller quorum (docs/operations.md).

Theory of operation
-------------------
Each command asks the active controller through one blocking ``client.sync.Admin``:
``describe_quorum`` (DESCRIBE_QUORUM: voters with their Raft and RPC addresses, the leader, the
epoch, each voter's and broker's metadata offset and lag; a voter that does not answer is shown
UNREACHABLE) and ``add_raft_voter`` / ``remove_raft_voter`` (KIP-853 membership changes, one at
a time), which answer with the new voter set.
"""

from __future__ import annotations

import json
from typing import Any

import click
from rafka.client.cli._common import command_options, sync_admin

__all__ = ["quorum"]


@click.group()
def quorum() -> None:
    """The controller quorum."""


@quorum.command("describe")
@command_options(json=True)
def quorum_describe(bootstrap: str, as_json: bool) -> None:
    """Voters, leader, epoch, metadata offsets and lag."""
    with sync_admin(bootstrap) as admin:
        q = admin.describe_quorum()
    q.pop("error", None)
    if as_json:
        click.echo(json.dumps(q, default=str))
        return
    click.echo(f"leader {q.get('leader_id')}  epoch {q.get('epoch')}  high watermark {q.get('high_watermark')}")
    for v in q.get("voters") or []:
        where = f"  voter {v.get('id')}  raft {v.get('raft', '?')}  rpc {v.get('rpc', '?')}"
        if v.get("directory_id"):
            where += f"  dir {v['directory_id'][:8]}"
        if v.get("reachable") is False:  # a dead or cut-off voter: no offset to report
            click.echo(f"{where}  UNREACHABLE  raft lag {v.get('raft_lag')}")
            continue
        extra = f"  log start {v['log_start_offset']}" if v.get("log_start_offset") else ""
        click.echo(f"{where}  offset {v.get('metadata_offset')}  lag {v.get('lag')}{extra}")
    for o in q.get("observers") or []:
        state = "  fenced" if o.get("fenced") else ""
        click.echo(f"  broker {o.get('id')}  offset {o.get('metadata_offset')}  lag {o.get('lag')}{state}")


def _voter_ids(voters: list[dict[str, Any]]) -> list[int]:
    """The ids of the voter set an add / remove answered with, sorted."""
    return sorted(v["id"] for v in voters if v.get("id") is not None)


@quorum.command("add-voter")
@click.option("--id", "voter_id", type=int, required=True, help="the controller's node id")
@click.option("--address", required=True, help="its Raft address, HOST:RAFT_PORT")
@command_options()
def quorum_add_voter(voter_id: int, address: str, bootstrap: str) -> None:
    """Add a controller to the quorum (KIP-853). Start the node first: on an empty data dir it
    waits to be added. One change at a time; docs/operations.md."""
    with sync_admin(bootstrap) as admin:
        voters = admin.add_raft_voter(voter_id, address)
    click.echo(f"voter {voter_id} added; voters {_voter_ids(voters)}")


@quorum.command("remove-voter")
@click.option("--id", "voter_id", type=int, required=True, help="the voter's node id")
@command_options()
def quorum_remove_voter(voter_id: int, bootstrap: str) -> None:
    """Remove a controller from the quorum (e.g. one whose disk is lost). docs/operations.md."""
    with sync_admin(bootstrap) as admin:
        voters = admin.remove_raft_voter(voter_id)
    click.echo(f"voter {voter_id} removed; voters {_voter_ids(voters)}")
