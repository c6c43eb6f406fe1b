"""Quotas per user name a member of the tenant; nobody learns who exists elsewhere."""

from django.urls import reverse

from apps.tenancy.models import Role


def test_a_quota_for_someone_outside_the_tenant_answers_the_same_whether_they_exist(acme, globex):
    client = acme.client(Role.ADMIN)
    answers = []
    for username in (globex.users[Role.MEMBER].username, "nobody-at-all"):
        body = {"tenant": str(acme.tenant.id), "user": username, "gpus": 2}
        response = client.post(reverse("quota-list"), body, format="json")
        assert response.status_code == 400, response.content
        answers.append(response.json()["error"]["fields"]["user"])
    assert answers[0] == [answers[1][0].replace("nobody-at-all", "globex-member")]
    member = acme.users[Role.MEMBER].username
    body = {"tenant": str(acme.tenant.id), "user": member, "gpus": 2}
    assert client.post(reverse("quota-list"), body, format="json").status_code == 201
