"""A tenant's notification defaults made real for the people they apply to: a member with no
subscription of their own in the tenant gets one per default (all their own jobs, the default's
events, their account's e-mail or the bell), made or brought in line when one of their jobs has
something to tell; a member who has made their own has none from the defaults."""

from django.contrib.auth import get_user_model

from apps.notifications.models import Channel, NotificationDefault, Subscription


def defaults_apply(*, owners: set[tuple]) -> None:
    """(tenant id, user id) of the jobs about to be told of: their default subscriptions made,
    updated or removed (a few queries, whatever the number of jobs)."""
    tenants = {tenant for tenant, _ in owners}
    defaults: dict = {}
    for row in NotificationDefault.objects.filter(tenant_id__in=tenants):
        defaults.setdefault(row.tenant_id, []).append(row)
    owners = {(t, u) for t, u in owners if t in defaults}
    if not owners:
        return
    users = {user for _, user in owners}
    rows = Subscription.objects.filter(tenant_id__in=tenants, user_id__in=users).select_related(
        "user"
    )
    own, made = set(), {}
    for row in rows:
        if row.default_id is None:
            own.add((row.tenant_id, row.user_id))
        else:
            made[(row.tenant_id, row.user_id, row.default_id)] = row
    gone = [row.pk for (t, u, _d), row in made.items() if (t, u) in own]
    Subscription.objects.filter(pk__in=gone).delete()
    emails = dict(get_user_model().objects.filter(pk__in=users).values_list("pk", "email"))
    for tenant, user in owners - own:
        for default in defaults[tenant]:
            row = made.get((tenant, user, default.pk))
            address = emails.get(user, "") if default.channel == Channel.EMAIL else ""
            if default.channel == Channel.EMAIL and not address:
                continue  # no e-mail on the account: nothing to send to
            if row is None:
                Subscription.objects.create(
                    tenant_id=tenant, user_id=user, default=default, events=default.events,
                    channel=default.channel, address=address,
                )  # fmt: skip
            elif (row.events, row.address) != (default.events, address):
                row.events, row.address = default.events, address
                row.save(update_fields=["events", "address", "updated_at"])
