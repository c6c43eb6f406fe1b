from rest_framework.routers import SimpleRouter

from apps.notifications.api import views


def register(router: SimpleRouter) -> None:
    router.register("subscriptions", views.SubscriptionViewSet, basename="subscription")
    router.register(
        "notification-defaults",
        views.NotificationDefaultViewSet,
        basename="notification-default",
    )
